"""Dashboard pages (views); each module is a Streamlit page script run by st.navigation."""
